"""Word lists the generator draws names, places and reference rows from (written for streamdi)."""

from __future__ import annotations


def _w(text: str) -> list[str]:
    return text.split()


FIRST_NAMES = _w(
    """
Aaron Abigail Ada Adrian Agnes Alan Albert Alice Alma Amber Amos Andrea Angela Anita Anton April
Arthur Audrey Barbara Basil Beatrice Ben Bernard Bertha Beth Bianca Boris Brenda Bruce Caleb
Camila Carl Carmen Carol Cecil Celia Chester Chloe Clara Claude Clifford Colin Cora Craig Cyrus
Daisy Dale Daniel Daphne Darius Dean Delia Dennis Diana Dolores Donald Dora Douglas Edgar Edith
Edna Edwin Eileen Elena Elias Eliza Ellen Elmer Elsa Emil Emma Enid Eric Erma Ernest Esther
Ethan Eugene Eva Evelyn Felix Fiona Flora Floyd Frances Frank Freda Gavin Gemma Gerald Gilbert
Gina Gladys Glen Gloria Gordon Grace Greta Gus Harold Harriet Hazel Hector Helen Henry Hilda
Homer Hugo Ida Igor Imogen Ines Irene Iris Irma Isaac Ivan Jacob Jane Janet Jasper Jean Jerome
Joan Joel Josef Joyce Judith Julian June Karen Karl Kate Keith Kyle Laura Lena Leo Leon Lester
Lidia Linus Lois Lorna Louis Lucia Luke Lydia Mabel Marcus Margo Maria Marvin Maud Maxine Miles
Milton Mina Miriam Molly Myra Nadia Naomi Nathan Nell Nina Noel Nora Norman Olga Oliver Olive
Oscar Otto Pamela Paul Pearl Peter Phyllis Quentin Rachel Ralph Regina Rex Rita Robert Rosa Ruby
Rufus Ruth Sabina Samuel Sandra Saul Selma Silas Simon Sonia Stella Stuart Sybil Tamara Thea
Theo Tobias Tom Ulla Ursula Valerie Vera Victor Viola Vivian Walter Wanda Wendy Wilma Xavier
Yara Yvonne Zachary Zelda Zora
"""
)

LAST_NAMES = _w(
    """
Abbott Acosta Adair Ainsley Albright Alcott Aldridge Ambrose Archer Arden Ashby Atwood Avery
Bagley Baird Banning Barlow Barton Baxter Beckett Bellamy Benson Birch Blackwood Blair Bolton
Booker Bowen Bramley Brennan Brewster Brock Buckley Burgess Burke Calder Callahan Carver
Castillo Chandler Chase Chester Clayton Clifford Colby Conway Corbett Crane Crawley Cromwell
Dalton Darby Davenport Dawes Delaney Denton Dexter Dillard Donovan Dorsey Draper Drummond Dudley
Dunbar Durant Easton Eaton Elliott Ellison Emerson Everett Fairfax Farley Fenwick Finch Fletcher
Forbes Foster Fowler Frost Fulton Gaines Gallagher Garland Garner Gibbons Gilmore Goddard
Golding Graves Greer Griffin Hadley Hale Halsey Hammond Harding Harlow Hartley Hastings
Hawthorne Hayward Hendricks Hewitt Holden Hollis Horton Howell Hughes Humphrey Ingram Irving
Jarvis Jennings Keller Kendall Kerr Kimball Kingsley Kirby Knox Lacey Lambert Landry Langley
Larkin Lawson Leland Lindsey Lockhart Lowell Lynch Maddox Malone Manning Marlow Mather Maynard
McAllister McBride Mercer Merritt Milburn Monroe Morrow Mosley Munro Nash Newell Norris Norton
Oakley Ogden Osborne Padgett Palmer Parrish Paxton Pemberton Penrose Percival Pickett Porter
Prescott Quincy Radcliffe Ramsey Randall Redford Reeves Rhodes Ridley Riley Rowe Rutherford
Sawyer Sexton Shelby Sherwood Sinclair Slater Somers Spencer Stafford Stanton Sterling Stoddard
Sutton Talbot Tanner Thorne Tipton Townsend Tucker Underwood Vance Vaughn Wade Walcott Warrick
Webster Wheeler Whitaker Whitley Wilder Winslow Woodward Wyatt Yardley Yates Yorke Zeller
"""
)

STREET_NAMES = _w(
    """
Acorn Alder Amber Apple Aspen Autumn Bay Beacon Birch Bluff Brook Canyon Cedar Cherry Chestnut
Cliff Clover Copper Coral Cottage Creek Crest Cypress Dale Dawn Deer Dogwood Eagle Elm Fern
Field Forest Fox Garden Glen Granite Grove Harbor Hawk Hazel Heather Hickory Hidden Highland
Hill Holly Iron Ivy Juniper Lake Laurel Lilac Linden Maple Meadow Mill Mist Moss Oak Orchard
Pebble Pine Pioneer Pleasant Pond Prairie Quarry Rain Raven Ridge River Rock Rose Sage Sand
Shadow Silver Spring Spruce Stone Summit Sun Sunset Thistle Timber Valley Violet Walnut Willow
Wind Winter Wood
"""
)

STREET_SUFFIXES = _w(
    """
Street Avenue Road Lane Drive Court Place Way Boulevard Terrace Circle Trail Parkway
"""
)

CITIES = _w(
    """
Abbotsford Akron Albany Amarillo Anchorage Arlington Augusta Austin Bakersfield Barrie Billings
Boise Boulder Brampton Burlington Calgary Camden Charleston Chatham Cheyenne Columbia Concord
Dayton Denton Dover Duluth Edmonton Elgin Erie Eugene Fargo Flint Frederick Fresno Gatineau
Gilbert Glendale Guelph Halifax Hamilton Hartford Helena Irvine Jackson Kamloops Kelowna
Kingston Laredo Lethbridge Lincoln London Madison Markham Medford Moncton Monterey Nanaimo
Newark Norfolk Oakville Ogden Olympia Omaha Orlando Oshawa Peoria Portland Provo Quebec Raleigh
Regina Reno Richmond Rochester Saginaw Salem Sarnia Savannah Saskatoon Sherbrooke Spokane
Springfield Sudbury Surrey Tacoma Tampa Topeka Toronto Tucson Tulsa Vancouver Vernon Victoria
Waco Waterloo Whitby Windsor Winnipeg Yakima Yonkers
"""
)

US_STATES = _w(
    """
AL AK AZ AR CA CO CT DE FL GA HI ID IL IN IA KS KY LA ME MD MA MI MN MS MO MT NE NV NH NJ NM NY
NC ND OH OK OR PA RI SC SD TN TX UT VT VA WA WV WI WY DC
"""
)

CA_PROVINCES = _w(
    """
AB BC MB NB NL NS NT NU ON PE QC SK YT
"""
)

CA_PROVINCE_NAMES = (
    "Alberta",
    "British Columbia",
    "Manitoba",
    "New Brunswick",
    "Newfoundland",
    "Nova Scotia",
    "Northwest Territory",
    "Nunavut",
    "Ontario",
    "Prince Edward Island",
    "Quebec",
    "Saskatchewan",
    "Yukon",
)

COUNTRIES = ("United States of America", "Canada")

EMAIL_DOMAINS = _w(
    """
mailbox.test inbox.example post.example letters.test webmail.example example.com example.org
example.net courier.test messages.example
"""
)

EMPLOYERS = [
    *_w(
        """
Acme Apex Atlas Beacon Brightline Cascade Cobalt Crescent Delta Evergreen Falcon Frontier
Granite Harbor Horizon Keystone Lighthouse Meridian Northstar Oakridge Pinnacle Quantum Redwood
Sequoia Summit Sunrise Titan Trident Vanguard Vertex
"""
    ),
    "Smith, Jones & Co",
    'The "Corner" Shop',
]

SECTORS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "BM",
        "Basic Materials",
        (
            "Chemicals",
            "Specialty Chemicals",
            "Metal Mining",
            "Gold and Silver",
            "Steel and Iron",
            "Forest Products",
            "Paper and Packaging",
            "Fabricated Plastics",
            "Construction Materials",
        ),
    ),
    (
        "CG",
        "Capital Goods",
        (
            "Aerospace and Defense",
            "Heavy Machinery",
            "Electrical Equipment",
            "Industrial Tools",
            "Shipbuilding",
            "Engineering Services",
            "Building Products",
            "Farm Equipment",
        ),
    ),
    (
        "CC",
        "Consumer Cyclical",
        (
            "Automobiles",
            "Auto Parts",
            "Apparel",
            "Footwear",
            "Home Furnishings",
            "Leisure Products",
            "Toys and Games",
            "Recreational Vehicles",
            "Jewelry",
            "Appliances",
        ),
    ),
    (
        "CN",
        "Consumer Staples",
        (
            "Beverages",
            "Food Processing",
            "Tobacco",
            "Personal Care",
            "Household Products",
            "Grocery Stores",
            "Crops",
            "Fish and Livestock",
        ),
    ),
    (
        "EN",
        "Energy",
        (
            "Oil and Gas Drilling",
            "Oil Refining",
            "Natural Gas Utilities",
            "Coal",
            "Oilfield Services",
            "Pipelines",
            "Renewable Energy",
        ),
    ),
    (
        "FN",
        "Financial",
        (
            "Regional Banks",
            "Money Center Banks",
            "Savings Institutions",
            "Consumer Lending",
            "Investment Services",
            "Insurance",
            "Life Insurance",
            "Real Estate Operations",
            "Asset Management",
        ),
    ),
    (
        "HC",
        "Health Care",
        (
            "Pharmaceuticals",
            "Biotechnology",
            "Medical Devices",
            "Hospitals",
            "Health Insurance",
            "Medical Supplies",
            "Laboratories",
            "Home Care",
        ),
    ),
    (
        "SV",
        "Services",
        (
            "Advertising",
            "Broadcasting",
            "Publishing",
            "Restaurants",
            "Hotels and Lodging",
            "Casinos and Gaming",
            "Schools",
            "Waste Management",
            "Security Services",
            "Staffing",
            "Rental and Leasing",
            "Printing",
        ),
    ),
    (
        "TC",
        "Technology",
        (
            "Computer Hardware",
            "Software",
            "Semiconductors",
            "Networking Equipment",
            "Computer Services",
            "Electronic Instruments",
            "Storage Devices",
            "Internet Services",
            "Office Equipment",
        ),
    ),
    (
        "TR",
        "Transportation",
        (
            "Airlines",
            "Air Freight",
            "Railroads",
            "Trucking",
            "Marine Shipping",
            "Transit Services",
            "Logistics",
        ),
    ),
    (
        "UT",
        "Utilities",
        (
            "Electric Utilities",
            "Water Utilities",
            "Multi-Utilities",
            "Independent Power",
            "Telephone Services",
            "Wireless Carriers",
        ),
    ),
    (
        "RT",
        "Retail",
        (
            "Department Stores",
            "Discount Stores",
            "Specialty Retail",
            "Drug Stores",
            "Home Improvement Stores",
            "Catalog Retail",
            "Electronics Stores",
            "Bookstores",
            "Sporting Goods Stores",
        ),
    ),
)

NATIONAL_BRACKETS = (
    ("US", (0.10, 0.15, 0.25, 0.28, 0.35)),
    ("CN", (0.12, 0.18, 0.22, 0.26, 0.29)),
)

BRACKET_WORDS = ("lowest", "lower", "middle", "upper", "top")

CT_WORDS = _w(
    """
Purchase Sale Transfer Deposit Withdrawal Dividend Interest Fee Settlement Adjustment Refund
"""
)

SPRATINGS = _w(
    """
AAA AA+ AA AA- A+ A A- BBB+ BBB BBB- BB+ BB BB- B+ B B- CCC+ CCC CCC- CC C D
"""
)

BAD_SPRATINGS = tuple(
    _w(
        """
ZZ AAAA E X+ Q
"""
    )
)
